"""The lab: measurements of the real engine that calibrate the simulator
(``iterserve profile``) and the fidelity comparison between the two; the
0x0E result coordinates, the Comparable predicate, comparison tables that
refuse to rank incomparable runs, and one-control sensitivity.

Above ``engine``, ``sim`` and ``model`` in the layers; it imports torch only
through :mod:`iterserve.lab.profiling` (the measurement).
"""
