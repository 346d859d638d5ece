"""azure_utils.read_secret outside Azure: the environment-variable rule and missing secrets.

The Key Vault path cannot run here (no vault, no Azure credentials); only its refusal
without the ``azure`` extra is tested.
"""

from __future__ import annotations

import logging
import sys

import pytest

from producer_lib import azure_utils
from producer_lib.azure_utils import read_secret, secret_env_var
from producer_lib.errors import ConfigError


@pytest.fixture(autouse=True)
def _no_vault(monkeypatch):
    monkeypatch.delenv("AZURE_KEY_VAULT_URL", raising=False)


@pytest.mark.parametrize(
    ("name", "variable"),
    [
        pytest.param("StarTek-Source", "SECRET_STARTEK_SOURCE", id="dash"),
        pytest.param("Labware-Source", "SECRET_LABWARE_SOURCE", id="seed-oracle"),
        pytest.param("db.pass word", "SECRET_DB_PASS_WORD", id="dot-and-space"),
        pytest.param("ümlaut-1", "SECRET__MLAUT_1", id="non-ascii"),
        pytest.param("already_UPPER_9", "SECRET_ALREADY_UPPER_9", id="underscore-digits"),
    ],
)
def test_secret_env_var_rule(name, variable):
    assert secret_env_var(name) == variable


def test_read_secret_from_the_derived_variable(monkeypatch, caplog):
    monkeypatch.setenv("SECRET_STARTEK_SOURCE", "tok-S3cr3t-123")
    with caplog.at_level(logging.DEBUG, logger="producer_lib"):
        assert read_secret("StarTek-Source") == "tok-S3cr3t-123"
    assert "S3cr3t" not in caplog.text


@pytest.mark.parametrize("value", [None, ""], ids=["unset", "empty"])
def test_missing_secret_names_secret_and_variable(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("SECRET_STARTEK_SOURCE", raising=False)
    else:
        monkeypatch.setenv("SECRET_STARTEK_SOURCE", value)
    with pytest.raises(ConfigError) as caught:
        read_secret("StarTek-Source")
    assert caught.value.secret == "StarTek-Source"
    assert "SECRET_STARTEK_SOURCE" in str(caught.value)
    assert "AZURE_KEY_VAULT_URL" in str(caught.value)


def test_empty_name_is_refused():
    with pytest.raises(ConfigError, match="non-empty"):
        read_secret(" ")


def test_vault_without_the_azure_extra_says_what_to_install(monkeypatch):
    for module in ("azure.identity", "azure.keyvault.secrets"):
        monkeypatch.setitem(sys.modules, module, None)  # as if the extra were not installed
    monkeypatch.setenv("AZURE_KEY_VAULT_URL", "https://my-vault.vault.azure.net")
    azure_utils._vault_client.cache_clear()
    with pytest.raises(ConfigError, match=r"pip install 'flow-platform\[azure\]'"):
        read_secret("StarTek-Source")


def test_vault_names_are_checked_before_asking_the_vault(monkeypatch):
    monkeypatch.setenv("AZURE_KEY_VAULT_URL", "https://my-vault.vault.azure.net")
    with pytest.raises(ConfigError, match="only letters, digits and '-'") as caught:
        read_secret("db_password")
    assert "my-vault" in str(caught.value)
