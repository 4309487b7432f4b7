"""The lab: measurements of the real engine that calibrate the simulator
(``iterserve profile``) and the fidelity comparison between the two.

Above ``engine``, ``sim`` and ``model`` in the layers; it imports torch only
through :mod:`iterserve.lab.profiling` (the measurement).
"""
