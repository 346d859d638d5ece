"""Where a flow runs and how its triggers answer: ``FLOW_*`` and :func:`get_environment`."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from producer_lib.settings.base import EnvSettings, blank_is_unset

__all__ = ["FlowSettings", "TriggerSettings", "get_environment"]


def _default_environment(values: dict[str, Any]) -> str:
    return str(values.get("azure_functions_environment") or "").strip().lower() or "dev"


class FlowSettings(EnvSettings):
    """Where a flow runs and how its triggers answer (env prefix ``FLOW_``).

    Attributes:
        azure_functions_environment: The Azure Functions host's environment
            (``AZURE_FUNCTIONS_ENVIRONMENT``, set by the host): the default of
            ``environment``, in lower case.
        environment: Deployment environment, part of every transactional id
            (``FLOW_ENVIRONMENT``); default: ``AZURE_FUNCTIONS_ENVIRONMENT`` in lower case,
            else ``dev`` (:func:`get_environment`).
    """

    model_config = SettingsConfigDict(env_prefix="FLOW_")
    _what: ClassVar[str] = "flow settings"

    azure_functions_environment: str = Field(
        default="", validation_alias="AZURE_FUNCTIONS_ENVIRONMENT"
    )
    environment: str = Field(
        default_factory=_default_environment, min_length=1, pattern=r"^[A-Za-z0-9_-]+$"
    )


class TriggerSettings(EnvSettings):
    """How a flow's HTTP triggers answer (env prefix ``FLOW_``).

    Attributes:
        http_wait_s: Seconds an HTTP trigger waits for a run before it answers 202 and the
            caller polls (``FLOW_HTTP_WAIT_S``); the default stays below Azure's 230 s cut of
            a response, with room for the answer to travel.
    """

    model_config = SettingsConfigDict(env_prefix="FLOW_")
    _what: ClassVar[str] = "trigger settings"

    http_wait_s: float = Field(default=200.0, ge=0, allow_inf_nan=False)

    _blank_is_unset = field_validator("http_wait_s", mode="before")(blank_is_unset)


def get_environment() -> str:
    """The deployment environment (``dev``, ``test``, ``prod``...), KafkaProducer's 4th argument.

    The rule: ``FLOW_ENVIRONMENT`` (environment or ``.env``) when set; else the Azure
    Functions host's ``AZURE_FUNCTIONS_ENVIRONMENT`` in lower case (``Development`` ->
    ``development``); else ``dev``. Letters, digits, ``_`` and ``-`` only: it becomes part of
    the producer's transactional id. The runner's own producer uses the same value.

    Raises:
        ConfigError: The value has other characters.
    """
    return FlowSettings().environment
