"""Key material, DSSE/in-toto statements and PAdES signatures."""
