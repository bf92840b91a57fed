"""pb_utils.Tensor with torch CUDA tensors, inside a served model. Each check answers "ok" or
what went wrong; the test asserts every one is "ok"."""

import json
import sys
import traceback

import numpy as np
import torch
from torch.utils.dlpack import from_dlpack, to_dlpack

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.device = torch.device(f"cuda:{args['model_instance_device_id']}")
        self.device_id = int(args["model_instance_device_id"])

    def execute(self, requests):
        checks = {}
        for name in sorted(n for n in dir(self) if n.startswith("check_")):
            try:
                getattr(self, name)()
                checks[name] = "ok"
            except Exception:
                checks[name] = traceback.format_exc()
        text = np.array([json.dumps(checks).encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("RESULTS", text)]) for _ in requests]

    def check_zero_copy_round_trip(self):
        source = torch.arange(16, dtype=torch.float32, device=self.device)
        t = pb_utils.Tensor.from_dlpack("x", source)
        assert not t.is_cpu()
        assert t.__dlpack_device__() == (2, self.device_id), t.__dlpack_device__()
        assert t.shape() == [16]
        back = from_dlpack(t.to_dlpack())
        assert back.data_ptr() == source.data_ptr()
        assert torch.equal(torch.from_dlpack(t), source)

    def check_as_numpy_refused(self):
        t = pb_utils.Tensor.from_dlpack("x", torch.ones(2, device=self.device))
        try:
            t.as_numpy()
        except pb_utils.TritonModelException as e:
            assert str(e) == "Tensor is stored in GPU and cannot be converted to NumPy.", e
        else:
            raise AssertionError("as_numpy() of a GPU tensor did not raise")

    def check_non_contiguous_refused(self):
        try:
            pb_utils.Tensor.from_dlpack("x", torch.ones(4, 3, device=self.device).t())
        except pb_utils.TritonModelException as e:
            assert "DLPack tensor is not contiguous" in str(e), e
        else:
            raise AssertionError("a transposed CUDA tensor was accepted")

    def check_bf16(self):
        source = torch.tensor([1.5, -2.0], dtype=torch.bfloat16, device=self.device)
        t = pb_utils.Tensor.from_dlpack("b", source)
        back = torch.from_dlpack(t)
        assert back.dtype == torch.bfloat16 and torch.equal(back, source)

    def check_capsule_and_pb_tensor_inputs(self):
        source = torch.full((8,), 7.0, device=self.device)
        from_capsule = pb_utils.Tensor.from_dlpack("c", to_dlpack(source))
        again = pb_utils.Tensor.from_dlpack("d", from_capsule)
        assert not again.is_cpu()
        assert torch.from_dlpack(again).data_ptr() == source.data_ptr()

    def check_producer_stream_waited_for(self):
        # Work queued on a side stream is finished before from_dlpack returns.
        side = torch.cuda.Stream(device=self.device)
        with torch.cuda.stream(side):
            big = torch.ones(1 << 24, device=self.device)
            for _ in range(20):
                big = big * 1.0 + 0.0
            big = big * 3.0
            t = pb_utils.Tensor.from_dlpack("p", big)
        assert float(torch.from_dlpack(t).sum()) == 3.0 * (1 << 24)

    def check_consumer_stream(self):
        t = pb_utils.Tensor.from_dlpack("s", torch.arange(4.0, device=self.device))
        stream = torch.cuda.Stream(device=self.device)
        with torch.cuda.stream(stream):
            consumed = torch.from_dlpack(t)  # torch passes its current stream to __dlpack__
            total = float(consumed.sum())
        assert total == 6.0

    def check_refcount_of_to_dlpack(self):
        t = pb_utils.Tensor.from_dlpack("r", torch.ones(4, device=self.device))
        before = sys.getrefcount(t)
        capsule = t.to_dlpack()
        assert sys.getrefcount(t) - before == 1
        del capsule
        assert sys.getrefcount(t) - before == 0

    def check_memory_outlives_the_producer(self):
        source = torch.arange(1000.0, device=self.device)
        t = pb_utils.Tensor.from_dlpack("l", source)
        del source
        torch.cuda.empty_cache()
        assert float(torch.from_dlpack(t).sum()) == float(sum(range(1000)))
