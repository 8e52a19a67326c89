"""What-if: predict what a new gateway limit will do, from the live engine's metrics alone.

Layout (pure first, IO last)::

    lengths.py    prompt/output length distributions from vLLM's 1-2-5 histograms (pure)
    window.py     a window of scrapes -> the observed rates, means and quantiles (pure)
    calibrate.py  observed window -> the engine model's profile and the workload (pure)
    predict.py    calibrated inputs + candidate limits -> predictions in virtual time (pure)
    render.py     predictions -> table text or JSON (pure)
    collect.py    scrape vLLM /metrics and the gateway's /admin/stats over a window (IO)
    service.py    collect -> calibrate -> predict -> render: what `llmtop whatif` calls (IO)

Every figure a prediction shows is labelled as one and carries the fit's own error: the model
replays the current setting and is compared with what the window showed.
"""
