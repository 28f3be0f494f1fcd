"""The modules of `tests/helpers/wild_modules.py` written with `import pytorch_lightning as L` (and
`from pytorch_lightning import LightningModule`): its source with the two imports swapped, so
both packages run the same code."""

import inspect

from . import wild_modules

SOURCE = inspect.getsource(wild_modules)
SOURCE = SOURCE.replace("import lightning as L", "import pytorch_lightning as L")
SOURCE = SOURCE.replace("from lightning import", "from pytorch_lightning import")
exec(compile(SOURCE, __file__, "exec"))  # the other package's copy of the same code
