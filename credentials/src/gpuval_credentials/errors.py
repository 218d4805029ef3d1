"""The one error of gpuval_credentials."""


class CredentialsError(Exception):
    """No usable identity: the message names where it was read, the field and what to do."""
