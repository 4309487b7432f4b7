"""The lab (0x0E): result coordinates, the Comparable predicate, comparison
tables that refuse to rank incomparable runs, and one-control sensitivity."""
