from modelyard.cli.entry import run

run()
