#!/bin/sh
# The Kafka ACLs auditrec's record depends on (docs/guides/security.md, "Kafka: who may write
# what"): publishers may write the ingest topic and nothing else; auditrec's principal owns its
# topics, consumer groups and transactional ids. Run it once per cluster, with an authorizer on.
#
#   KAFKA_BOOTSTRAP=kafka:9093 KAFKA_COMMAND_CONFIG=admin.properties \
#   AUDITREC_PRINCIPAL=User:auditrec PUBLISHERS="User:crawler User:workflows" \
#   READERS="User:analytics" sh deploy/kafka/acls.sh
#
# TOPIC_PREFIX (default audit) and GROUP_PREFIX (default: the topic prefix) are auditrec's
# AUDITREC_TOPIC_PREFIX and AUDITREC_GROUP_PREFIX; INGEST_TOPIC is AUDITREC_INGEST_TOPIC
# (default <prefix>.ingest.v1). KAFKA_ACLS names the kafka-acls command (default kafka-acls.sh).
set -eu

: "${KAFKA_BOOTSTRAP:?set KAFKA_BOOTSTRAP (host:port of the cluster)}"
: "${AUDITREC_PRINCIPAL:?set AUDITREC_PRINCIPAL (auditrec's principal, e.g. User:auditrec)}"
TOPIC_PREFIX=${TOPIC_PREFIX:-audit}
GROUP_PREFIX=${GROUP_PREFIX:-$TOPIC_PREFIX}
INGEST_TOPIC=${INGEST_TOPIC:-$TOPIC_PREFIX.ingest.v1}
KAFKA_ACLS=${KAFKA_ACLS:-kafka-acls.sh}
PUBLISHERS=${PUBLISHERS:-}
READERS=${READERS:-}

acl() {
  if [ -n "${KAFKA_COMMAND_CONFIG:-}" ]; then
    "$KAFKA_ACLS" --bootstrap-server "$KAFKA_BOOTSTRAP" --command-config "$KAFKA_COMMAND_CONFIG" --add --force "$@"
  else
    "$KAFKA_ACLS" --bootstrap-server "$KAFKA_BOOTSTRAP" --add --force "$@"
  fi
}

# auditrec: every topic of its prefix (it creates them at init: lifecycle, probe-requests,
# confirmations, dead-letter, ingest), every group of its group prefix (one per component:
# <group prefix>-projector, -reconciler, -probe, -confirmer, ...; the subscriber reads a
# Cloudflare Queue, not Kafka, and appends as auditrec), its transactions.
acl --allow-principal "$AUDITREC_PRINCIPAL" --operation All \
  --resource-pattern-type prefixed --topic "$TOPIC_PREFIX."
acl --allow-principal "$AUDITREC_PRINCIPAL" --operation All \
  --resource-pattern-type prefixed --group "$GROUP_PREFIX-"
acl --allow-principal "$AUDITREC_PRINCIPAL" --operation Write --operation Describe \
  --resource-pattern-type prefixed --transactional-id auditrec-
acl --allow-principal "$AUDITREC_PRINCIPAL" --operation IdempotentWrite --operation Create \
  --cluster
case "$INGEST_TOPIC" in
  "$TOPIC_PREFIX".*) ;;
  *) acl --allow-principal "$AUDITREC_PRINCIPAL" --operation All --topic "$INGEST_TOPIC" ;;
esac

# publishers: the ingest topic only (never the lifecycle, probe-request or dead-letter topics).
for principal in $PUBLISHERS; do
  acl --allow-principal "$principal" --operation Write --operation Describe --topic "$INGEST_TOPIC"
  acl --allow-principal "$principal" --operation IdempotentWrite --cluster
done

# readers of the log: the lifecycle topic, in consumer groups of their own.
for principal in $READERS; do
  acl --allow-principal "$principal" --operation Read --operation Describe \
    --topic "$TOPIC_PREFIX.lifecycle.v1"
done
