"""The engine's side of the shared prefix tier: ``reader`` fetches the part of a prompt's prefix
the local cache lacks into lent host blocks (``host_front``), ``importer`` brings it into the
device cache on the step thread, ``writer`` sends computed blocks out, and ``link`` is what
the server hands in. The tier itself is ``kvpool.remote``, which this package never imports."""
