"""The version of dagwright, in a leaf module so that any module may import it without
importing the package facade (which composes the engine)."""

__version__ = "0.1.0"
