"""A few sentences of three speaking roles, and the windows LEAF's Shakespeare makes of text:
the text path tested on words, not on noise."""

SPEECHES = {
    "THE_TEMPEST_PROSPERO": "Our revels now are ended. These our actors, as I foretold you, were "
    "all spirits and are melted into air, into thin air; and, like the baseless fabric of this "
    "vision, the cloud-capp'd towers, the gorgeous palaces, the solemn temples.",
    "HAMLET_HAMLET": "To be, or not to be, that is the question: whether 'tis nobler in the mind "
    "to suffer the slings and arrows of outrageous fortune, or to take arms against a sea of "
    "troubles and by opposing end them. To die: to sleep; no more.",
    "MACBETH_MACBETH": "Tomorrow, and tomorrow, and tomorrow, creeps in this petty pace from day "
    "to day to the last syllable of recorded time, and all our yesterdays have lighted fools the "
    "way to dusty death. Out, out, brief candle!",
}
WINDOW = 80  # LEAF's Shakespeare examples: 80 characters and the next one


def windows(text: str, starts: range) -> dict[str, list[str]]:
    return {
        "x": [text[s : s + WINDOW] for s in starts],
        "y": [text[s + WINDOW] for s in starts],
    }
