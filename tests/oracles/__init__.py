"""Reference implementations the product's fast paths are tested against."""
