"""Writes ``lowercase_words.txt``: common English words that are written in lower case far more
often than capitalised ("things", "good", "summer"), from spacy-lookups-data's word
probabilities (MIT licence).

At the start of a sentence such a word is capitalised only by its position, so when the
tagger calls it a proper noun and the NER names no entity there, the extractor does not take
it for a name. Names that are also words ("Grace", "Mark", "Rose") are written capitalised
about as often as not and stay out of the list. Loading the whole table takes seconds and
hundreds of megabytes, so the list is made once and committed:

    ./engram manage shell -c "import runpy; runpy.run_module('graph.extract.make_lowercase_words', run_name='__main__')"
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

# A word is listed when its lower-case form is at least e (natural log 1.0) times as frequent as
# its capitalised form, and common (log probability above -14: the 50,000 or so most frequent).
MARGIN = 1.0
COMMON = -14.0
OUT = Path(__file__).with_name("lowercase_words.txt")


def main() -> None:
    import spacy_lookups_data

    table = Path(spacy_lookups_data.__file__).parent / "data" / "en_lexeme_prob.json.gz"
    with gzip.open(table) as handle:
        prob = json.load(handle)
    words = sorted(
        word
        for word, p in prob.items()
        if word.isalpha() and word.islower() and p > COMMON and p > prob.get(word.capitalize(), -25.0) + MARGIN
    )
    OUT.write_text("\n".join(words) + "\n")
    print(f"{len(words)} words -> {OUT}")


if __name__ == "__main__":
    main()
