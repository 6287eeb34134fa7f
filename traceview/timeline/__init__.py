"""The report's step timeline (JSON key `timeline`): merged segments per step and rank, on aligned clocks."""
