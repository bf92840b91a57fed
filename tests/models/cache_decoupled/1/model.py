"""Never runs: the config is rejected."""


class TritonPythonModel:
    def execute(self, requests):
        return None
