"""Sphinx configuration of the API reference (``bash docs/build.sh``)."""

import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import art_adp  # noqa: E402  (the version comes from the package, its single source)

project = "art-adp"
author = "art-adp contributors"
copyright = "2026, art-adp contributors"
release = version = art_adp.__version__

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.viewcode"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
autoclass_content = "both"  # class docstring + __init__'s :param: list
napoleon_google_docstring = True
napoleon_numpy_docstring = False
nitpicky = False
html_theme = "alabaster"
html_static_path = []
exclude_patterns = ["_build"]
