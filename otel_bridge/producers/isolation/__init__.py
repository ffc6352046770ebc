"""A producer in a child process, off the trainer's interpreter lock: the room both wings share for it.

The face: :class:`ProducerProcess` (the parent's side: the channel, the child's lifetime, its logs and health),
:class:`IsolatedProducer` (what a wing's producer in a child does the same on both wings),
:class:`ChildKind` (which wing's child and how it is named), :data:`ANSWER_MARGIN_S`, and :func:`serve` (the child's
side, called by a wing's ``child`` module). Inside: the frames between the two (``frames``).
"""

from otel_bridge.producers.isolation.child import serve
from otel_bridge.producers.isolation.parent import ANSWER_MARGIN_S, ChildKind, IsolatedProducer, ProducerProcess

__all__ = ["ANSWER_MARGIN_S", "ChildKind", "IsolatedProducer", "ProducerProcess", "serve"]
