"""HTTP on the wire, as the proxy and the replayer both speak it: the HTTP/1.1 client
(``client.py``: the pool; ``connection.py``: one connection and its response, and
what the two share), the token timeline of an SSE stream (``sse.py``), the rule for
a header added to every request and the probe's own header (``header_rules.py``), a
``Retry-After``'s wait (``retry_after.py``), and whether two URLs reach one server
(``same_host.py``). Core, like the rest of ``tailreplay/``: it imports nothing above it.
"""
