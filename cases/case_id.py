"""The format of ``cases.spec.CaseSpec.id``, for readers that get only the id (a test id, a record
without its spec). Kept free of torch: the report's data layer reads it."""
import re

CASE_ID_PATTERN = r"M(\d+)-K(\d+)-N(\d+)-([^-]+)-s(\d+)"
CASE_ID = re.compile(f"^{CASE_ID_PATTERN}$")
