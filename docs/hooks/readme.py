"""MkDocs hook: the site's user guide (index.md) is the README, read at build time.

The README's links are relative to the repository's root: links into docs/ are made relative to
the site's pages, and links to other files of the repository (which the site does not hold)
become their text with the path beside it.
"""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
_LINK = re.compile(r"\[([^\]]+)\]\((?!https?://|#|mailto:)([^)\s]+)\)")


def _relink(match: re.Match) -> str:
    text, target = match.groups()
    if target.startswith("docs/"):
        return f"[{text}]({target[len('docs/') :]})"
    return text if text.strip("`") == target else f"{text} (`{target}`)"


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    if page.file.src_uri != "index.md":
        return markdown
    return _LINK.sub(_relink, README.read_text(encoding="utf-8"))
