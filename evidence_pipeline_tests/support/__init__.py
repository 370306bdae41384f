"""What the tests share: servers, signers, hostile and real-world documents, and the data they read. A test module
imports from here (or takes a fixture from conftest.py), never from another test module."""
