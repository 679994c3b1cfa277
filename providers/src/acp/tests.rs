//! Unit tests of the ACP adapter: whole results of recorded-shape conversations.
