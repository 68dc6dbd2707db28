"""The operator declaration's old address: ``contract.operator`` holds the declaration and
``goldens.blocks`` the canonical row blocks; an operator folder that imports them from here
keeps working."""
from contract.operator import (OUTPUT_KINDS, ROUNDED_TERMS, ChunkGolden, Operator, OutputDecl,  # noqa: F401
                               TensorDecl)
from goldens.blocks import REDUCTION_BLOCK, blocks, operand_sum, row_product  # noqa: F401
