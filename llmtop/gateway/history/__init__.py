"""The gateway's history: its polls of the engines and of itself, kept in a SQLite file in the
recording format and served by /admin/history (docs/recording.md, "History in the gateway").
`store` is the file; `keeper` the thread that writes it off the event loop; `window` reads the
admin API's since/until."""
