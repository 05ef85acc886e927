"""Test aids kept out of production modules: fault injection for crash tests."""
