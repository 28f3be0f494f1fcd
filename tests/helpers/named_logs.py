"""A module whose test_step logs names that are not plain metric names (probe W8): paths out of
the run (`../../escape`), empty and `.` parts, a character MLflow refuses."""

from torch import Tensor

from tests.helpers.lightning_modules import Linear

ODD_NAMES = ("../../escape", "a//b", "./c", "top@1")


class OddNames(Linear):
    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        x, y = batch
        accuracy = (self(x).argmax(dim=1) == y).float().mean()
        self.log("test_accuracy", accuracy)
        for offset, name in enumerate(ODD_NAMES):
            self.log(name, accuracy + offset)
