"""The accuracy suite's building blocks: case table, tolerances, inputs, golden, comparison."""
