"""The Tile language: parser, syntax tree, checks, shape binding and lowering to Stripe."""
