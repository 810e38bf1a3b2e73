"""A cluster's layout generations: the layouts it has used over its life, each from its switch
time on (``GET /layout``'s ``"layouts"``; ``clients/vectors/LAYOUTS.md``).

Every ID of a later generation is greater than every ID of an earlier one, so an ID belongs to
the generation with the largest ``first_id`` at or below it, and is taken apart with that
generation's layout. All generations of a cluster have the same ID width.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

from .client import IdParts, Layout


class LayoutGeneration(NamedTuple):
    """One layout generation: its number, its first ID, when it took over (``None`` for
    generation 0) and its layout (``max_batch`` 0: a layout, not a node's announcement)."""

    generation: int
    first_id: int
    switch_unix_ms: Optional[int]
    layout: Layout


def _int(obj: Any, key: str) -> int:
    v = obj.get(key) if isinstance(obj, dict) else None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"layout generation without a non-negative integer {key!r}: {obj!r}")
    return v


def _check_layout(layout: Layout) -> None:
    t, w, s, r = layout.timestamp_bits, layout.worker_bits, layout.sequence_bits, layout.region_bits
    if min(t, w, s) < 1 or t + w + s > 63 or t + w + s < 32 or r > w:
        raise ValueError(f"not a valid layout: {layout!r}")


class LayoutGenerations:
    """The layout generations of a cluster, generation 0 first, checked: consecutive numbers,
    one ID width, each successor's first ID the one its switch gives
    (``(switch - epoch_before) << (worker_bits_before + sequence_bits_before)``) and its epoch
    early enough that its IDs at the switch are at or above it."""

    def __init__(self, generations: Iterable[LayoutGeneration]):
        gens = list(generations)
        if not gens:
            raise ValueError("no layout generations")
        for i, g in enumerate(gens):
            _check_layout(g.layout)
            if g.generation != i:
                raise ValueError(f"layout generation {g.generation} listed as number {i}")
            if i == 0:
                if g.first_id != 0 or g.switch_unix_ms is not None:
                    raise ValueError("layout generation 0 has first_id 0 and no switch")
                continue
            prev = gens[i - 1]
            if g.layout.id_bits != prev.layout.id_bits:
                raise ValueError(f"layout generation {i} changes the ID width")
            if g.switch_unix_ms is None or (
                prev.switch_unix_ms is not None and g.switch_unix_ms <= prev.switch_unix_ms
            ):
                raise ValueError(f"layout generation {i} needs a switch after the one before")
            shift = prev.layout.worker_bits + prev.layout.sequence_bits
            want = (g.switch_unix_ms - prev.layout.epoch_ms) << shift
            if g.switch_unix_ms < prev.layout.epoch_ms or g.first_id != want:
                raise ValueError(f"layout generation {i}: first_id {g.first_id}, its switch gives {want}")
            ts = g.switch_unix_ms - g.layout.epoch_ms
            if ts < 0 or ts << (g.layout.worker_bits + g.layout.sequence_bits) < g.first_id:
                raise ValueError(f"layout generation {i}: its epoch is too late for IDs to keep increasing")
        self._gens: Tuple[LayoutGeneration, ...] = tuple(gens)

    @classmethod
    def from_json(
        cls, obj: Union[Dict[str, Any], Sequence[Dict[str, Any]]]
    ) -> "LayoutGenerations":
        """From a node's ``GET /layout`` answer (parsed JSON) or its ``"layouts"`` list."""
        items = obj.get("layouts") if isinstance(obj, dict) else obj
        if not isinstance(items, (list, tuple)):
            raise ValueError('expected GET /layout\'s body or its "layouts" list')
        gens: List[LayoutGeneration] = []
        for o in items:
            first = o.get("first_id_str") if isinstance(o, dict) else None
            first_id = int(first) if isinstance(first, str) else _int(o, "first_id")
            switch = o.get("switch_unix_ms")
            if switch is not None:
                switch = _int(o, "switch_unix_ms")
            layout = Layout(
                _int(o, "epoch_ms"),
                _int(o, "timestamp_bits"),
                _int(o, "worker_bits"),
                _int(o, "sequence_bits"),
                _int(o, "region_bits"),
                0,
            )
            gens.append(LayoutGeneration(_int(o, "layout_generation"), first_id, switch, layout))
        return cls(gens)

    @property
    def generations(self) -> Tuple[LayoutGeneration, ...]:
        """Every generation, generation 0 first."""
        return self._gens

    def generation_of(self, id_: int) -> LayoutGeneration:
        """The generation ``id_`` belongs to; ``ValueError`` for a value outside ``0 .. 2^W``."""
        width = self._gens[0].layout.id_bits
        if isinstance(id_, bool) or not isinstance(id_, int):
            raise TypeError(f"an ID is an int, not {type(id_).__name__}")
        if not 0 <= id_ < (1 << width):
            raise ValueError(f"{id_} is not an ID of this cluster: its IDs are {width} bits wide")
        for g in reversed(self._gens):
            if g.first_id <= id_:
                return g
        return self._gens[0]

    def decode(self, id_: int) -> Tuple[int, IdParts]:
        """``id_``'s generation number and its fields under that generation's layout."""
        g = self.generation_of(id_)
        return g.generation, g.layout.decode(id_)

    def __repr__(self) -> str:
        return f"LayoutGenerations({list(self._gens)!r})"
