# nsbox/cluster.py: placement over several nodes: ask each /v1/capacity, create on the freest, pass on when refused.
"""A create (or a one-shot run) goes to the next node when one is full (429), shutting down (503) or gone
before anything was sent; any other refusal would be refused everywhere and is raised at once. An exec is
never here: it always goes to its sandbox's node and is never retried."""

import random
from concurrent.futures import ThreadPoolExecutor

from .errors import CapacityFull, NsboxError, RequestTimeout, ServerGone

CAPACITY_TIMEOUT_S = 5.0


def _num(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _dict(v):
    return v if isinstance(v, dict) else {}


def _least(a, b):
    """The smaller of two figures a node may or may not give."""
    return b if a is None else a if b is None else min(a, b)


def _slots(boxes):
    top = _num(boxes.get("max"))
    return None if top is None else top - (_num(boxes.get("running")) or 0)


def score(capacity, template=None):
    """How attractive a node is, compared element by element, largest first; None for a node that did not
    answer: (has room, free sandbox slots, free memory, ready pool sandboxes of the template). Each figure is
    the smaller of the server's and this client's own share of it ("client"), which a create must fit too."""
    if not isinstance(capacity, dict):
        return None
    own = _dict(capacity.get("client"))
    slots = _least(_slots(_dict(capacity.get("sandboxes"))), _slots(_dict(own.get("sandboxes"))))
    slots = float("inf") if slots is None else slots
    memory = _least(_num(_dict(capacity.get("memory_bytes")).get("free")),
                    _num(_dict(own.get("memory_bytes")).get("free")))
    pids = _least(_num(_dict(capacity.get("pids")).get("free")), _num(_dict(own.get("pids")).get("free")))
    pool = capacity.get("pool") if isinstance(capacity.get("pool"), dict) else {}
    entry = pool.get(template or "host")
    ready = _num(entry.get("ready")) if isinstance(entry, dict) else None
    room = slots > 0 and (memory is None or memory > 0) and (pids is None or pids > 0)
    return (1 if room else 0, slots, memory or 0, ready or 0)


def _capacity(transport):
    try:
        return transport.request("GET", "/v1/capacity", timeout=CAPACITY_TIMEOUT_S)
    except NsboxError:
        return None


def order(transports, template=None):
    """The transports in the order to try: freest first (equal ones shuffled), the silent ones last."""
    with ThreadPoolExecutor(max_workers=len(transports)) as pool:
        caps = list(pool.map(_capacity, transports))
    ranked = [(score(c, template), random.random(), t) for c, t in zip(caps, transports)]
    answered = sorted((r for r in ranked if r[0] is not None), key=lambda r: (tuple(-x for x in r[0]), r[1]))
    return [r[2] for r in answered] + [r[2] for r in ranked if r[0] is None]


def _retryable(err, sent_matters):
    if isinstance(err, CapacityFull):
        return True
    if isinstance(err, ServerGone) and err.status == 503:
        return True
    if isinstance(err, (ServerGone, RequestTimeout)):
        return not sent_matters or not err.request_sent
    return False


def try_each(transports, template, attempt, sent_matters):
    """Runs attempt(transport) on each node in order until one answers; answers (transport, answer).
    sent_matters: the request must not be repeated once a node may have received it (a one-shot run)."""
    if len(transports) == 1:
        return transports[0], attempt(transports[0])
    failures = []
    for t in order(transports, template):
        try:
            return t, attempt(t)
        except NsboxError as err:
            if not _retryable(err, sent_matters):
                raise
            failures.append(err)
    last = failures[-1]
    cls = CapacityFull if all(isinstance(f, CapacityFull) for f in failures) else type(last)
    text = "; ".join("%s: %s" % (f.url, f.message) for f in failures)
    raise cls("no node could take the request (%s)" % text, status=last.status, code=last.code, body=last.body,
              url=last.url, request_sent=any(f.request_sent for f in failures))
