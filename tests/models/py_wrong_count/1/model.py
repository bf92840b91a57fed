class TritonPythonModel:
    def execute(self, requests):
        return []  # one response per request is required
