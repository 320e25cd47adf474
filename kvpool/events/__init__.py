"""KV cache events in vLLM's wire format, so routers built for vLLM can see kvpool's cache.

wire.py       the messages (KVEventBatch of BlockStored / BlockRemoved / AllBlocksCleared) and
              the ZMQ framing constants, msgpack via msgspec
config.py     ``kvpool serve --kv-events-config JSON``: vLLM's KVEventsConfig keys, validated
publisher.py  the PUB socket, the ROUTER replay socket and the bounded queue between the step
              thread and the publisher thread
recorder.py   the pool observer: turns the block manager's register / evict / clear calls into
              events, never blocking the step thread

The pools call the observer (kvpool.core: ``stored``, ``removed``, ``cleared``); the server
wires a recorder into the engine and serves ``GET /v1/kvpool/kv_events`` (what a subscriber
needs: endpoints, topic, block size, hash spec). The router's subscriber (kvpool.router) reads
the stream back with wire.py's decoder.
"""
