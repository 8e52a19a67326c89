"""What-if: predict what a new gateway limit will do, from the live engine's metrics alone.

`model/` is pure (window -> calibration -> virtual-time prediction -> words); `collect` reads
the window (IO) and `service` is what `llmtop whatif` calls. Every figure a prediction shows is
labelled as one and carries the fit's own error: the model replays the current setting and is
compared with what the window showed.
"""
