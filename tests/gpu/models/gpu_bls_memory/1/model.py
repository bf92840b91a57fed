"""GPU tensors through BLS, as Triton places them: a GPU input reaches a callee with
FORCE_CPU_ONLY_INPUT_TENSORS "no" as a GPU tensor and one without it as a host tensor; an
output comes back where the callee made it unless preferred_memory names CPU or a GPU. Each
check answers "ok" or what went wrong (RESULTS). FACTS says whether the callee got the
caller's own device memory and whether the output is that memory again (zero copy, told by
the pointers in in-process mode; in process mode the callee is another process)."""

import json
import traceback

import numpy as np
import torch

import triton_python_backend_utils as pb_utils

N = 1024


class TritonPythonModel:
    def initialize(self, args):
        self.device = torch.device(f"cuda:{args['model_instance_device_id']}")
        self.facts = {}

    def execute(self, requests):
        checks = {}
        for name in sorted(n for n in dir(self) if n.startswith("check_")):
            try:
                getattr(self, name)()
                checks[name] = "ok"
            except Exception:
                checks[name] = traceback.format_exc()
        results = np.array([json.dumps(checks).encode()], dtype=np.object_)
        facts = np.array([json.dumps(self.facts).encode()], dtype=np.object_)
        out = [pb_utils.Tensor("RESULTS", results), pb_utils.Tensor("FACTS", facts)]
        return [pb_utils.InferenceResponse(out) for _ in requests]

    def _call(self, model, tensor, preferred=None, decoupled=False, parameters=None):
        kwargs = {} if preferred is None else {"preferred_memory": preferred}
        if parameters:
            kwargs["parameters"] = parameters
        request = pb_utils.InferenceRequest(
            model_name=model,
            inputs=[_tensor("IN", tensor)],
            requested_output_names=["OUT", "WHERE"],
            **kwargs,
        )
        if decoupled:
            responses = list(request.exec(decoupled=True))
            assert len(responses) == 1, f"{len(responses)} responses"
            response = responses[0]
        else:
            response = request.exec()
        if response.has_error():
            raise AssertionError(response.error().message())
        self._last = response
        out = pb_utils.get_output_tensor_by_name(response, "OUT")
        where = _host(pb_utils.get_output_tensor_by_name(response, "WHERE"))
        return out, [int(v) for v in where]

    def check_gpu_input_reaches_a_gpu_callee_and_comes_back_on_the_gpu(self):
        x = torch.arange(N, dtype=torch.float32, device=self.device)
        out, where = self._call("gpu_identity", x)
        assert where[:2] == [0, self.device.index], where
        assert not out.is_cpu(), "the output should stay on the GPU (no preferred_memory)"
        assert out.__dlpack_device__() == (2, self.device.index), out.__dlpack_device__()
        y = torch.from_dlpack(out)
        assert torch.equal(y, x)
        self.facts["callee_got_the_callers_memory"] = where[2] == x.data_ptr()
        self.facts["output_is_the_callers_memory"] = y.data_ptr() == x.data_ptr()

    def check_a_cpu_only_callee_gets_a_host_tensor(self):
        x = torch.arange(N, dtype=torch.float32, device=self.device)
        out, where = self._call("gpu_identity_cpu_inputs", x)
        assert where[0] == 1, where
        assert out.is_cpu(), "the callee made its output on the host"
        np.testing.assert_array_equal(out.as_numpy(), x.cpu().numpy())

    def check_preferred_cpu_brings_gpu_outputs_to_the_host(self):
        x = torch.arange(N, dtype=torch.float32, device=self.device)
        cpu = pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0)
        out, where = self._call("gpu_identity", x, preferred=cpu)
        assert where[0] == 0, where
        assert out.is_cpu()
        np.testing.assert_array_equal(out.as_numpy(), x.cpu().numpy())

    def check_preferred_gpu_puts_host_outputs_on_the_gpu(self):
        host = np.arange(N, dtype=np.float32)
        gpu = pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_GPU, self.device.index)
        out, where = self._call("gpu_identity_cpu_inputs", host, preferred=gpu)
        assert where[0] == 1, where
        assert not out.is_cpu(), "preferred_memory GPU: the output should be on the GPU"
        info = pb_utils.get_output_tensor_by_name(self._last, "WHERE")
        assert not info.is_cpu(), "preferred_memory GPU: every output goes to the GPU"
        assert out.__dlpack_device__() == (2, self.device.index), out.__dlpack_device__()
        np.testing.assert_array_equal(torch.from_dlpack(out).cpu().numpy(), host)

    def check_decoupled_exec_places_outputs_the_same_way(self):
        x = torch.arange(N, dtype=torch.float32, device=self.device) * 2
        out, where = self._call("gpu_identity", x, decoupled=True)
        assert where[0] == 0, where
        assert not out.is_cpu()
        assert torch.equal(torch.from_dlpack(out), x)

    def check_memory_is_freed_when_the_last_reference_goes(self):
        # The callee's outputs the caller no longer holds are freed (process mode: the
        # exports it kept for this process), as QA's BLS tensor lifecycle test asks.
        def allocated():
            _, where = self._call(
                "gpu_identity", torch.ones(1, device=self.device), parameters={"memory": True}
            )
            return where[2]

        base = allocated()
        kept = []
        for _ in range(4):
            out, _ = self._call("gpu_identity", torch.ones(1 << 20, device=self.device))
            kept.append(out)
        held = allocated()
        del kept, out
        after = allocated()
        self.facts["callee_memory"] = [base, held, after]
        assert after <= base, (base, held, after)

    def check_a_bls_output_outlives_its_response(self):
        x = torch.arange(N, dtype=torch.float32, device=self.device) + 7
        out, _ = self._call("gpu_identity", x)
        kept = torch.from_dlpack(out)
        del out
        torch.cuda.synchronize(self.device)
        assert torch.equal(kept, x)


def _tensor(name, x):
    if isinstance(x, np.ndarray):
        return pb_utils.Tensor(name, x)
    return pb_utils.Tensor.from_dlpack(name, x)


def _host(tensor):
    # (preferred_memory GPU puts every output on the GPU, small ones too)
    return tensor.as_numpy() if tensor.is_cpu() else torch.from_dlpack(tensor).cpu().numpy()
