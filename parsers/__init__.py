"""Input-format parsers: one module per format, one `parse(path)` entry point each."""
