"""What a Prometheus alert of a finding is made from: the rules file's inputs (`spec`), the
figures as recording rules (`figures`), annotation templates (`templates`), the `Alert` itself.
Pure: text in, text out. The findings (core.findings) build their alerts from these."""
