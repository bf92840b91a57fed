"""Validation errors. Every message marked "2.51" was produced by the reference Triton 2.51 for
the same configuration (the model folder held a trivial model.py)."""

from __future__ import annotations

import pytest

from modelyard.config import normalize_config, parse_config_text, validate_config
from modelyard.errors import ConfigError, ErrorCode

B = 'backend: "python"\n'
IO = (
    'input [{name: "IN" data_type: TYPE_FP32 dims: [4]}]\n'
    'output [{name: "OUT" data_type: TYPE_FP32 dims: [4]}]\n'
)
ENS_STEP = (
    'ensemble_scheduling { step [{ model_name: "t" model_version: -1 '
    'input_map { key: "IN" value: "%s" } output_map { key: "OUT" value: "EOUT" } }] }'
)
ENS_IO = (
    'platform: "ensemble"\n'
    'input [{name: "EIN" data_type: TYPE_FP32 dims: [4]}]\n'
    'output [{name: "EOUT" data_type: TYPE_FP32 dims: [4]}]\n'
)

# (model name, config.pbtxt, Triton 2.51's message)
TRITON_251_ERRORS = [
    ("p_dims0", B + 'input [{name: "IN" data_type: TYPE_FP32 dims: [0]}]',
     "model input 'IN' dimension must be integer >= 1, or -1 to indicate a variable-size "
     "dimension for p_dims0"),
    ("p_no_dtype", B + 'input [{name: "IN" dims: [4]}]',
     "model input 'IN' must specify 'data_type' for p_no_dtype"),
    ("p_no_dims", B + 'input [{name: "IN" data_type: TYPE_FP32}]',
     "model input 'IN' must specify 'dims' for p_no_dims"),
    ("p_no_dims_reshape",
     B + 'max_batch_size: 4 input [{name: "IN" data_type: TYPE_FP32 reshape {shape: [1]}}]',
     "model input 'IN' must specify 'dims' for p_no_dims_reshape"),
    ("q_noname_input", B + "input [{data_type: TYPE_FP32 dims: [1]}]",
     "model input must specify 'name' for q_noname_input"),
    ("p_nchw", B + 'input [{name: "IN" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [4, 4]}]',
     "model input NHWC/NCHW require 3 dims for p_nchw"),
    ("p_reshape_bad", B + 'input [{name: "IN" data_type: TYPE_FP32 dims: [4] reshape: { shape: [5] }}]',
     "model input 'IN' has different size for dims and reshape for p_reshape_bad"),
    ("q_reshape_var",
     B + 'max_batch_size: 2 input [{name: "IN" data_type: TYPE_FP32 dims: [2, -1, 6] '
     "reshape { shape: [-1, 12] }}]",
     "model input 'IN' has different size for dims and reshape for q_reshape_var"),
    ("q_shape_tensor", B + 'input [{name: "IN" data_type: TYPE_INT32 dims: [1] is_shape_tensor: true}]',
     "shape tensors are only supported for TensorRT platform for q_shape_tensor"),
    ("q_batch_input_bad",
     B + IO + 'batch_input [{ kind: BATCH_ELEMENT_COUNT target_name: ["T"] data_type: TYPE_INT64 '
     'source_input: ["IN"] }]',
     "batch input data type must be TYPE_INT32 or TYPE_FP32 for q_batch_input_bad"),
    ("p_mbs_neg", B + IO + "max_batch_size: -1",
     "'max_batch_size' must be non-negative value for p_mbs_neg"),
    ("p_pref_gt", B + IO + "max_batch_size: 8 dynamic_batching { preferred_batch_size: [16] }",
     "dynamic batching preferred size must be <= max batch size for p_pref_gt"),
    ("q_pref_zero", B + IO + "max_batch_size: 4 dynamic_batching { preferred_batch_size: [0] }",
     "dynamic batching preferred size must be positive for q_pref_zero"),
    ("q_priority_bad", B + IO + "max_batch_size: 4 dynamic_batching { priority_levels: 2 }",
     "default priority level must be in range [1, 2] for q_priority_bad"),
    ("q_pqp_bad",
     B + IO + "max_batch_size: 4 dynamic_batching { priority_levels: 2 default_priority_level: 1 "
     "priority_queue_policy { key: 3 value {} } }",
     "priority queue policy must have priority level in range [1, 2] for q_pqp_bad"),
    ("q_preserve_delay",
     B + IO + "max_batch_size: 4 dynamic_batching { preserve_ordering: true "
     "default_queue_policy { default_timeout_microseconds: 5 timeout_action: DELAY } }",
     "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for "
     "q_preserve_delay"),
    ("p_corrid_fp32",
     B + IO + 'sequence_batching { control_input [{ name: "C" control [{ kind: '
     "CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 }] }] }",
     "unexpected data type for control CONTROL_SEQUENCE_CORRID for p_corrid_fp32. Allowed data "
     "types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING"),
    ("q_seq_novalues",
     B + IO + 'sequence_batching { control_input [{ name: "S" control [{ kind: '
     "CONTROL_SEQUENCE_START }] }] }",
     "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or "
     "'bool_false_true' for CONTROL_SEQUENCE_START for q_seq_novalues"),
    ("q_seq_dup",
     B + IO + 'sequence_batching { control_input [{ name: "S" control [{ kind: '
     'CONTROL_SEQUENCE_START int32_false_true: [0, 1] }] }, { name: "S2" control [{ kind: '
     "CONTROL_SEQUENCE_START int32_false_true: [0, 1] }] }] }",
     "sequence batching specifies multiple CONTROL_SEQUENCE_START tensors for q_seq_dup"),
    ("q_seq_three",
     B + IO + 'sequence_batching { control_input [{ name: "S" control [{ kind: '
     "CONTROL_SEQUENCE_START int32_false_true: [0, 1, 2] }] }] }",
     "sequence batching control 'int32_false_true' must have exactly 2 entries for "
     "CONTROL_SEQUENCE_START for q_seq_three"),
    ("q_slot_util", B + IO + "sequence_batching { direct { minimum_slot_utilization: 1.5 } }",
     "sequence batching minimum slot utilization must be in range (0.0, 1.0] for q_slot_util"),
    ("q_platform_python", 'platform: "python"\n' + IO,
     "unexpected platform type 'python' for q_platform_python"),
    ("p_gpu", B + IO + "instance_group [{kind: KIND_GPU}]",
     "instance group p_gpu_0 of model p_gpu has kind KIND_GPU but no GPUs are available"),
    ("q_gpu_ids", B + IO + "instance_group [{kind: KIND_GPU gpus: [0]}]",
     "instance group q_gpu_ids_0 of model q_gpu_ids specifies invalid or unsupported gpu id 0. "
     "GPUs with at least the minimum required CUDA compute compatibility of 6.000000 are: "),
    ("p_cpu_gpus", B + IO + "instance_group [{kind: KIND_CPU gpus: [0]}]",
     "instance group p_cpu_gpus_0 of model p_cpu_gpus has kind KIND_CPU but specifies one or "
     "more GPUs"),
    ("q_profile", B + IO + 'instance_group [{kind: KIND_CPU profile: ["0"]}]',
     "instance group q_profile_0 of model q_profile and platform specifies profile field which "
     "is only supported for TensorRT models"),
    ("q_ens_unused",
     'platform: "ensemble"\ninput [{name: "EIN" data_type: TYPE_FP32 dims: [4]}, '
     '{name: "EXTRA" data_type: TYPE_FP32 dims: [4]}]\n'
     'output [{name: "EOUT" data_type: TYPE_FP32 dims: [4]}]\n' + ENS_STEP % "EIN",
     "ensemble input 'EXTRA' for ensemble q_ens_unused' is not used"),
    ("q_ens_notwritten", ENS_IO + ENS_STEP % "MISSING",
     "ensemble input 'EIN' for ensemble q_ens_notwritten' is not used"),
    ("q_ens_group", ENS_IO + "instance_group [{count: 1}]\n" + ENS_STEP % "EIN",
     "instance group should not be specified for ensemble 'q_ens_group'"),
]  # fmt: skip


def check(name: str, text: str) -> None:
    cfg = normalize_config(parse_config_text(text, "config.pbtxt"), name)
    validate_config(cfg)


@pytest.mark.parametrize(("name", "text", "message"), TRITON_251_ERRORS, ids=lambda v: v[:20])
def test_triton_251_errors(name: str, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        check(name, text)
    assert info.value.message == message
    assert info.value.code == ErrorCode.INVALID_ARG


# (model name, config.pbtxt, message) from Triton's source (model_config_utils.cc)
SOURCE_ERRORS = [
    ("pair", 'backend: "pytorch" platform: "onnxruntime_onnx"',
     "unexpected 'platform' and 'backend' pair, got:onnxruntime_onnx, pytorch"),
    ("ens_backend", 'platform: "ensemble" backend: "python"',
     "Ensemble model 'ens_backend' must have platform type 'ensemble' and empty backend type"),
    ("ens_nosched", ENS_IO,
     "ensemble scheduling must be set for ensemble ens_nosched whose platform is ensemble"),
    ("notens", B + ENS_STEP % "EIN",
     "ensemble scheduling cannot be set for model 'notens' whose platform is not ensemble"),
    ("cache_dec", B + IO + "model_transaction_policy { decoupled: true } response_cache { enable: true }",
     "Response Cache does not currently support model cache_dec with 'decoupled' transaction "
     "policy. Please disable the response cache."),
    ("ctrl_noname", B + IO + "sequence_batching { control_input [{ }] }",
     "sequence batching control tensor must have a name for ctrl_noname"),
    ("corrid_vals",
     B + IO + 'sequence_batching { control_input [{ name: "C" control [{ kind: '
     "CONTROL_SEQUENCE_CORRID int32_false_true: [0, 1] data_type: TYPE_INT32 }] }] }",
     "sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or "
     "'bool_false_true' for CONTROL_SEQUENCE_CORRID for corrid_vals"),
    ("two_lists",
     B + IO + 'sequence_batching { control_input [{ name: "S" control [{ kind: '
     "CONTROL_SEQUENCE_END int32_false_true: [0, 1] bool_false_true: [false, true] }] }] }",
     "sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and "
     "'bool_false_true' for CONTROL_SEQUENCE_END for two_lists"),
    ("oldest_pref",
     B + IO + "max_batch_size: 2 sequence_batching { oldest { preferred_batch_size: [4] } }",
     "sequence batching preferred batch size must be <= max batch size for oldest_pref"),
    ("empty_reshape",
     B + 'input [{name: "IN" data_type: TYPE_FP32 dims: [1] reshape { shape: [] }}]',
     "model input 'IN' cannot have empty reshape for non-batching model as scalar tensors are "
     "not supported for empty_reshape"),
    ("bo_target",
     B + IO + 'batch_output [{ target_name: ["NOPE"] kind: BATCH_SCATTER_WITH_INPUT_SHAPE '
     'source_input: ["IN"] }]',
     "unknown target output name 'NOPE' for bo_target"),
    ("bi_source",
     B + IO + 'batch_input [{ kind: BATCH_ELEMENT_COUNT target_name: ["T"] data_type: TYPE_INT32 '
     'source_input: ["X"] }]',
     "unknown source input name 'X' for bi_source"),
    ("ens_written",
     'platform: "ensemble"\ninput [{name: "EIN" data_type: TYPE_FP32 dims: [4]}]\n'
     'output [{name: "EOUT" data_type: TYPE_FP32 dims: [4]}]\n'
     'ensemble_scheduling { step [{ model_name: "a" input_map { key: "i" value: "EIN" } '
     'output_map { key: "o" value: "MID" } }, { model_name: "b" input_map { key: "i" value: "MID" } '
     'input_map { key: "j" value: "LOST" } output_map { key: "o" value: "EOUT" } }] }',
     "output 'EOUT' for ensemble 'ens_written' is not written: at least one of its depending "
     "tensors, 'LOST', is not connected"),
    ("ens_step", 'platform: "ensemble" ensemble_scheduling { step [{ model_name: "" }] }',
     "must specify 'model_name' in step 0 of ensemble 'ens_step'"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "text", "message"), SOURCE_ERRORS, ids=lambda v: v[:20])
def test_errors_from_triton_source(name: str, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        check(name, text)
    assert info.value.message == message


@pytest.mark.parametrize("what", ["input", "output"])
def test_duplicate_tensor_names_are_rejected(what: str) -> None:
    # Triton 2.51 loads such a model and then fails its requests; modelyard refuses it.
    text = (
        B
        + f'{what} [{{name: "X" data_type: TYPE_FP32 dims: [4]}}, {{name: "X" data_type: TYPE_INT32 dims: [2]}}]'
    )
    with pytest.raises(ConfigError) as info:
        check("dup", text)
    assert info.value.message == f"model {what} 'X' is specified more than once for dup"


STATEFUL = """
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  direct { }
  control_input [
    { name: "START"  control [ { kind: CONTROL_SEQUENCE_START  int32_false_true: [ 0, 1 ] } ] },
    { name: "END"    control [ { kind: CONTROL_SEQUENCE_END    fp32_false_true: [ 0, 1 ] } ] },
    { name: "READY"  control [ { kind: CONTROL_SEQUENCE_READY  bool_false_true: [ false, true ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] }
  ]
}
input [ { name: "VALUE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "ACC" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


@pytest.mark.parametrize(
    "text",
    [
        B + IO,
        B + 'input [{name: "X" data_type: TYPE_FP32 dims: [4]}] '
        'output [{name: "X" data_type: TYPE_FP32 dims: [4]}]',  # same name in and out: fine
        B + 'max_batch_size: 8 input [{name: "IN" data_type: TYPE_STRING dims: [1] reshape: { shape: [ ] }}]',
        B + 'max_batch_size: 2 input [{name: "IN" data_type: TYPE_FP32 dims: [2, 4, -1, 6] '
        "reshape { shape: [8, -1, 1, 6] }}]",
        B + IO + 'instance_group [{kind: KIND_MODEL}]',
        B + IO + "max_batch_size: 4 dynamic_batching { priority_levels: 2 default_priority_level: 2 "
        "priority_queue_policy { key: 1 value { max_queue_size: 3 } } }",
        B + "max_batch_size: 8\n" + STATEFUL,
        ENS_IO + ENS_STEP % "EIN",
        B,  # no inputs or outputs at all: Triton serves it
    ],
)  # fmt: skip
def test_valid_configs(text: str) -> None:
    check("ok", text)
