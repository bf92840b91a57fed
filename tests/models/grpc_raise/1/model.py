class TritonPythonModel:
    def execute(self, requests):
        raise RuntimeError("grpc model failure")
