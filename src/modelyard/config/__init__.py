"""Model configuration: reading ``config.pbtxt``, repositories and versions, Triton's
normalization and validation, auto-complete helpers, and Triton's JSON rendering."""

from modelyard.config.auto_complete import (
    autocomplete_max_batch_size,
    config_from_autocomplete_dict,
    config_to_autocomplete_dict,
    merge_autocompleted_config,
)
from modelyard.config.normalize import (
    autocomplete_backend_fields,
    normalize_config,
    normalize_instance_groups,
    normalize_model_config,
)
from modelyard.config.pbtxt import (
    config_from_json,
    config_from_obj,
    load_config_file,
    parse_config_text,
)
from modelyard.config.render import config_to_dict, config_to_json, model_metadata
from modelyard.config.repository import (
    DUPLICATE_REASON,
    ModelLocation,
    available_versions,
    model_config_path,
    scan_repositories,
    select_versions,
    validate_model_name,
)
from modelyard.config.validate import (
    validate_config,
    validate_instance_groups,
    validate_io_config,
    validate_model_config,
)

__all__ = [
    "DUPLICATE_REASON",
    "ModelLocation",
    "autocomplete_backend_fields",
    "autocomplete_max_batch_size",
    "available_versions",
    "config_from_autocomplete_dict",
    "config_from_json",
    "config_from_obj",
    "config_to_autocomplete_dict",
    "config_to_dict",
    "config_to_json",
    "load_config_file",
    "merge_autocompleted_config",
    "model_config_path",
    "model_metadata",
    "normalize_config",
    "normalize_instance_groups",
    "normalize_model_config",
    "parse_config_text",
    "scan_repositories",
    "select_versions",
    "validate_config",
    "validate_instance_groups",
    "validate_io_config",
    "validate_model_config",
    "validate_model_name",
]
