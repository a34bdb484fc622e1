"""Sphinx configuration of the lightning-edit site: the Markdown pages of docs/ (MyST), the API reference from the
package's docstrings (autodoc) and the CLI reference from its parser (docs/_ext). It builds offline:

    pip install -e ".[docs]" && sphinx-build -W -b html docs docs/_build/html
"""

import sys
from importlib.metadata import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

package = metadata("lightning-edit")
project = package["Name"]
release = version = package["Version"]
html_title = f"{project} {release}"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",  # the docstrings' "Args:", "Returns:" and "Example:" sections are Google style
    "lightning_edit_docs",  # docs/_ext: the CLI's help text (cli.md), every module in the API reference (api.md)
]
source_suffix = {".md": "markdown"}
root_doc = "index"
# what docs/ holds that is not a page: the figures' data and plots (pages link them), docs/_ext, the build output
exclude_patterns = ["_build", "_ext", "figures", "**/__pycache__"]

html_theme = "furo"

# MyST: pages link to sections of other pages (metrics.md#generated-answers), down to ### headings; no page uses
# MyST's syntax extensions (::: fences, definition lists), so none is enabled
myst_heading_anchors = 3

autodoc_default_options = {"members": True, "member-order": "bysource", "show-inheritance": True}
# an override without a docstring of its own (a LightningModule hook) shows none, not Lightning's or torch's
autodoc_inherit_docstrings = False
autodoc_typehints = "description"
napoleon_numpy_docstring = False
# "Attributes:" sections as fields of their class: as directives they would describe the attributes autodoc
# describes too (duplicate object descriptions)
napoleon_use_ivar = True
