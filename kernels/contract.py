"""The backend contract's old address: ``contract.backend`` holds it (every check takes the
operator's declaration as its first argument); a plug-in that imports ``BackendUnsupported``
or ``ContractError`` from here keeps working."""
from contract.backend import (BackendUnsupported, ContractError, changed_since, clone_inputs,  # noqa: F401
                              input_digests, mutated_inputs, validate_inputs, validate_outputs)
