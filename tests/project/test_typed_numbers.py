"""No measured number is typed by hand in the results pages' prose (scripts/typed_numbers.py):
each is generated from records, reports or a source's reference file, or is one of the page's
declared settings."""

from scripts.typed_numbers import findings, readme_section, typed_numbers

# The SCAFFOLD tutorial page's sentence on its jobs' cost, as it was typed before it was generated
TYPED_COST = (
    "widths, AVX2 and AVX-512). Each job cost 70 to 100 minutes of one\n"
    "core at one torch thread (one round 40 to 55 s, by the machine and its load).\n"
)


def test_no_results_page_types_a_measured_number() -> None:
    found = findings()
    assert not found, (
        "measured numbers typed in prose (generate them, `<!-- v EXPR -->…<!-- /v -->`, or name a "
        "setting in the page's `<!-- settings: … -->`):\n" + "\n".join(found)
    )


def test_a_typed_time_accuracy_ratio_or_epsilon_is_found() -> None:
    assert list(typed_numbers(TYPED_COST)) == [(1, "70 to 100 minutes"), (2, "40 to 55 s")]
    text = (
        "FedAvg ends at 60.9% (the tutorial's 72.3%), SCAFFOLD +3.6 points above it,\n"
        "with 2.0× the bytes (710.8 MB), at ε = 7.9, reaching 70% in 42 rounds, at round 78.\n"
    )
    assert [number for _, number in typed_numbers(text)] == [
        "60.9%",
        "72.3%",
        "3.6 points",
        "2.0×",
        "710.8 MB",
        "ε = 7.9",
        "70%",
        "42 rounds",
        "round 78",
    ]


def test_generated_values_code_and_declared_settings_are_not_typed_numbers() -> None:
    text = (
        "<!-- settings: 70%; top-k 10%; ε = 10 -->\n"
        "FedAvg ends at <!-- v {R@algo=fedavg#final_accuracy_mean} pct1 -->60.9<!-- /v -->%\n"
        "(the tutorial: <!-- v {T#cells.fedavg.final_accuracy} f1 -->72.3<!-- /v -->%) and\n"
        "reaches 70% in <!-- v {R@algo=fedavg#rounds_to_70_mean} d -->36<!-- /v --> rounds, at\n"
        "ε = 10, with `fl.rounds=100 eval.target_accuracy=0.7` and `--metrics 12%`.\n"
        "```bash\npython -m fedlight fl.rounds=100  # about 40 minutes\n```\n"
        "<!-- block beside -->\n| a | 61.2% |\n<!-- /block -->\n"
    )
    assert list(typed_numbers(text)) == []


def test_only_the_readme_results_section_is_checked() -> None:
    readme = "# fedlight\n\nTests take 6 minutes.\n\n## A result\n\nIt ends at 59.0%.\n\n## Docs\n"
    assert [number for _, number in typed_numbers(readme_section(readme))] == ["59.0%"]
