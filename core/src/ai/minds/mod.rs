//! Minds: a mind asked through the OpenAI-style APIs (`chat`). The records are
//! `catalog::minds`; the hosted edition's facade is `engine::hosted`.

pub(crate) mod chat;
