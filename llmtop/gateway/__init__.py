"""The admission gateway in front of an engine's OpenAI API."""
