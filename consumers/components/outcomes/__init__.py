"""The outcome feed: each change of an audit's status auditrec decides or records, delivered to
the product's own systems (signed webhooks, a Cloudflare Queue). One :class:`Feed` per endpoint;
:class:`Outcomes` runs them as one component."""

from consumers.components.outcomes.component import Outcomes
from consumers.components.outcomes.feed import Feed, Pending
from consumers.components.outcomes.senders import QueueSender, Sender, WebhookSender

__all__ = ["Feed", "Outcomes", "Pending", "QueueSender", "Sender", "WebhookSender"]
