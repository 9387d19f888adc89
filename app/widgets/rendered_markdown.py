"""A finished answer rendered as Markdown, with every token's colour where its text landed.

Qt's own Markdown importer (``QTextDocument.setMarkdown``, md4c, GitHub dialect: headings, lists,
emphasis, inline code, fenced code blocks, tables; raw HTML as text, images as their reference, as
the exported pages show them) renders the answer; no other library is needed
for the window. The rendered text is the answer's source without its markup, so each rendered
character is matched back to the source character it shows and from there to the token that
wrote it (:mod:`engine.records.markdown_html`, which the exported pages use too).
Tokens accepted from an n-gram or a draft keep their colour and weight wherever they fall in the
rendered text; every rendered run keeps its token's source and step for tooltips and tests.
"""

from __future__ import annotations

from specdec_studio.app.qt import QtGui, QtWidgets
from specdec_studio.engine.records.markdown_html import Run, image_reference, rendered_owner, runs_of, source_owner

CODE_BLOCK_TINT = (127, 127, 127, 38)  # a grey wash that reads on light and dark themes alike
INLINE_CODE_TINT = (127, 127, 127, 46)


def render(texts: list[str], formats: list[QtGui.QTextCharFormat | None], prose_font: QtGui.QFont,
           code_font: QtGui.QFont) -> tuple[QtGui.QTextDocument, list[Run]]:
    """The document of the joined ``texts`` rendered as Markdown, each token's ``formats`` entry
    (None: the text's own look) merged onto the characters it wrote; prose in ``prose_font``,
    code in ``code_font`` on a tinted background. Returns the document and its token runs, in
    document positions."""
    source = "".join(texts)
    doc = QtGui.QTextDocument()
    doc.setDefaultFont(prose_font)
    # raw HTML is text (as in the exported pages): `a <int> b` shows, `<b>` does not turn bold
    features = QtGui.QTextDocument.MarkdownFeature
    doc.setMarkdown(source, features.MarkdownDialectGitHub | features.MarkdownNoHTML)
    _images_as_text(doc)
    _style_code(doc, prose_font, code_font)
    runs = runs_of(rendered_owner(source, doc.toRawText(), source_owner(texts)))
    cursor = QtGui.QTextCursor(doc)
    for run in runs:
        fmt = formats[run.piece]
        if fmt is None:
            continue
        cursor.setPosition(run.start)
        cursor.setPosition(run.end, QtGui.QTextCursor.KeepAnchor)
        cursor.mergeCharFormat(fmt)
    return doc, runs


def _images_as_text(doc: QtGui.QTextDocument) -> None:
    """Each image of the answer replaced by its reference as text: nothing is loaded from disk or
    the network for an answer (``![x](/some/file.png)`` would otherwise show that file)."""
    images = []
    block = doc.begin()
    while block.isValid():
        fragments = block.begin()
        while not fragments.atEnd():
            fragment = fragments.fragment()
            if fragment.charFormat().isImageFormat():
                image = fragment.charFormat().toImageFormat()
                alt = str(image.property(QtGui.QTextFormat.Property.ImageAltText) or "")
                images.append((fragment.position(), fragment.length(), image_reference(alt, image.name())))
            fragments += 1
        block = block.next()
    cursor = QtGui.QTextCursor(doc)
    for position, length, text in reversed(images):  # from the end: earlier positions stay valid
        cursor.setPosition(position)
        cursor.setPosition(position + length, QtGui.QTextCursor.KeepAnchor)
        cursor.insertText(text, QtGui.QTextCharFormat())


def _style_code(doc: QtGui.QTextDocument, prose: QtGui.QFont, code_font: QtGui.QFont) -> None:
    """Code blocks as monospace blocks on a tinted background, inline code tinted; the rest in
    the document's prose font (the stream it lands in is monospace)."""
    cursor = QtGui.QTextCursor(doc)
    block = doc.begin()
    while block.isValid():
        if block.blockFormat().hasProperty(QtGui.QTextFormat.BlockCodeFence):
            cursor.setPosition(block.position())
            block_format = block.blockFormat()
            block_format.setBackground(QtGui.QColor(*CODE_BLOCK_TINT))
            cursor.setBlockFormat(block_format)
            cursor.setPosition(block.position() + block.length() - 1, QtGui.QTextCursor.KeepAnchor)
            code = QtGui.QTextCharFormat()
            code.setFont(code_font, QtGui.QTextCharFormat.FontPropertiesSpecifiedOnly)
            cursor.mergeCharFormat(code)
        else:
            fragments = block.begin()
            while not fragments.atEnd():
                fragment = fragments.fragment()
                cursor.setPosition(fragment.position())
                cursor.setPosition(fragment.position() + fragment.length(), QtGui.QTextCursor.KeepAnchor)
                look = QtGui.QTextCharFormat()
                if fragment.charFormat().fontFixedPitch():
                    look.setFontFamilies(code_font.families())
                    look.setBackground(QtGui.QColor(*INLINE_CODE_TINT))
                else:
                    look.setFontFamilies(prose.families())
                cursor.mergeCharFormat(look)
                fragments += 1
        block = block.next()


def prose_font_like(size_from: QtGui.QFont) -> QtGui.QFont:
    """The application's proportional font at the stream's size."""
    font = QtGui.QFont(QtWidgets.QApplication.font())
    font.setPointSizeF(size_from.pointSizeF())
    return font
