"""JSON payloads that keep the order of keys, so a run reads the same on both backends.

Temporal's default JSON converter writes every payload with ``sort_keys=True``. A tool's
reply, a plan step, an error's details — every dict that crosses Temporal's wire — would
come back with its keys sorted, and the same run would give a different ``RunResult`` JSON
locally (the tool's order) and on Temporal (alphabetical order). This converter is the
SDK's default chain with the plain-JSON member replaced by one that writes keys in the
order the dict holds them. Decoding is unchanged (``json.loads`` keeps the order it
reads), so histories written by the default converter still replay.

Determinism does not suffer: a workflow reads back exactly the bytes its history
recorded, whatever their key order.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
)

__all__ = ["KeyOrderPayloadConverter", "keeping_key_order"]


class KeyOrderJSONPlainPayloadConverter(JSONPlainPayloadConverter):
    """``json/plain`` as the SDK writes it (compact separators, its encoder), keys in
    the dict's own order instead of sorted."""

    def to_payload(self, value: Any) -> Payload | None:
        return Payload(
            metadata={"encoding": self.encoding.encode()},
            data=json.dumps(value, cls=self._encoder, separators=(",", ":")).encode())


class KeyOrderPayloadConverter(CompositePayloadConverter):
    """The SDK's default payload converters, with :class:`KeyOrderJSONPlainPayloadConverter`
    in place of the plain-JSON one (binary, protobuf and null values as before)."""

    def __init__(self) -> None:
        super().__init__(*(KeyOrderJSONPlainPayloadConverter()
                           if type(converter) is JSONPlainPayloadConverter else converter
                           for converter in DefaultPayloadConverter.default_encoding_payload_converters))


def keeping_key_order(converter: DataConverter) -> DataConverter:
    """``converter`` with the key-order payload converter, when it uses the SDK's default
    one; a payload converter of the user's own is left as it is."""
    if converter.payload_converter_class is not DefaultPayloadConverter:
        return converter
    return dataclasses.replace(converter, payload_converter_class=KeyOrderPayloadConverter)
