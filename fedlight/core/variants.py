"""Reference variants: one setting that picks the choices a published implementation made.

A module with variants declares a table `{variant: {switch: value}}`; its switches default to
None ("the variant's"), and `fill_from_variant` fills each switch left None from the chosen row. A
switch given explicitly wins over the variant, so `algo.variant=niid_bench
algo.control_norm=momentum_steps` is NIID-Bench's SCAFFOLD with one choice changed.
docs/configuration.md's "Reference variants" lists each row with the files it was read from.
"""

from collections.abc import Mapping

from fedlight.core.errors import require

VariantTable = Mapping[str, Mapping[str, object]]


def fill_from_variant(owner: object, key: str, variants: VariantTable) -> None:
    """Sets each of `owner`'s switches that is None to the value of its `variant`'s row; `key` is
    the config path of the owner's `variant` setting, for the error."""
    variant = owner.variant  # type: ignore[attr-defined]
    require(
        variant in variants,
        f"{key}={variant} is not a variant of {type(owner).__name__}; use one of "
        + ", ".join(variants),
    )
    for switch, value in variants[variant].items():
        if getattr(owner, switch) is None:
            setattr(owner, switch, value)
    owner.variant_switches = {switch: getattr(owner, switch) for switch in variants[variant]}  # type: ignore[attr-defined]


def resolved_variants(components: Mapping[str, object]) -> dict[str, dict[str, object]]:
    """Each component's variant and the switches it ran with, by config group (summary.json's
    `variants`): the YAML shows the switches a variant filled as null."""
    return {
        group: {"variant": component.variant, **component.variant_switches}  # type: ignore[attr-defined]
        for group, component in components.items()
        if hasattr(component, "variant_switches")
    }
