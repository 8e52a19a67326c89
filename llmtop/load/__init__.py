"""The load generator (`runner`: closed and open loops of streamed requests) and its statistics
(`stats`: pure arithmetic on the results: percentiles, SLO attainment, the table)."""
