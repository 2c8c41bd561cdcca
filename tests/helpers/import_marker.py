"""A module that tasks name in ``import_names`` to check that a worker refuses it: importing it is harmless,
and whether it was imported shows in ``sys.modules``."""

IMPORTED = True
