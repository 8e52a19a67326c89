"""What-if: predict what a new gateway limit will do, from the live engine's metrics alone.

`model/` is pure (window -> calibration -> virtual-time prediction -> words), `collect` reads the
window, `service` is `llmtop whatif`; each figure carries the fit's error on the current setting.
"""
