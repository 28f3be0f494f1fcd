"""GitHub-flavoured markdown tables, the one form every report table takes."""


def markdown_table(header: list[str], body: list[list[str]], text_columns: int = 1) -> list[str]:
    """A GitHub table; columns after the first `text_columns` hold numbers and align right."""

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    align = ["---"] * text_columns + ["---:"] * (len(header) - text_columns)
    return [line(header), line(align), *(line(r) for r in body)]
