"""`triton.runtime.errors`."""
from ...errors import TilejitError


class OutOfResources(TilejitError):
    def __init__(self, required=0, limit=0, name="resource"):
        self.required, self.limit, self.name = required, limit, name
        super().__init__(f"out of resource: {name}, required: {required}, hardware limit: {limit}")
