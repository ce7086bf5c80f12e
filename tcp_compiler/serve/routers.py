"""Which data-parallel replica an arriving request joins (`tcpc serve --dp R --router NAME`): one
registered class per policy, as the schedulers are (tcp_compiler.serve.schedulers); `--router`
offers every registered name, in the order registered."""

from __future__ import annotations

from typing import ClassVar


class Router:
    """A routing policy; one instance per run, so it may keep state between requests."""

    name: ClassVar[str]

    def pick(self, outstanding: list[int]) -> int:
        """The replica for the next request, given each replica's unfinished requests."""
        raise NotImplementedError


ROUTERS: dict[str, type[Router]] = {}


def register(cls: type[Router]) -> type[Router]:
    ROUTERS[cls.name] = cls
    return cls


def router(name: str) -> Router:
    return ROUTERS[name]()


@register
class RoundRobin(Router):
    """Each request to the next replica in turn, whatever their load (a plain load balancer)."""

    name = "round-robin"

    def __init__(self) -> None:
        self.turn = 0

    def pick(self, outstanding: list[int]) -> int:
        chosen = self.turn % len(outstanding)
        self.turn += 1
        return chosen


@register
class LeastOutstanding(Router):
    """The replica with the fewest unfinished requests (the first of those tied): long requests
    that pile up on one replica steer the next ones elsewhere."""

    name = "least-outstanding"

    def pick(self, outstanding: list[int]) -> int:
        return min(range(len(outstanding)), key=outstanding.__getitem__)
