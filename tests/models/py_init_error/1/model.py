class TritonPythonModel:
    def initialize(self, args):
        lorem_ipsum  # noqa: B018, F821 - raises NameError on purpose

    def execute(self, requests):
        return []
