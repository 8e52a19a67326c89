"""Pure logic: parsing, rates, quantiles, health rules. No IO, no clock, no UI."""
