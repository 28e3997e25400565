"""Which PyTorch operators a piece of code dispatches: what a GPU launches (one kernel or more each),
and the operators that make the host wait for the device."""

from torch.utils._python_dispatch import TorchDispatchMode

# reading a value back (.item(), float(), bool(), int()), shapes that depend on values (nonzero,
# boolean indexing), comparisons read on the host
SYNCS = ("_local_scalar_dense", "nonzero", "masked_select", "aten.equal", "aten.is_nonzero", "aten.item")


class OperatorLog(TorchDispatchMode):
    """``with OperatorLog() as log: ...`` records the name of every operator dispatched in ``log.names``."""

    def __init__(self):
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))

    def syncs(self) -> list[str]:
        """The recorded operators that wait for the device."""
        return [name for name in self.names if any(s in name for s in SYNCS)]
